"""The upstream wire's vocabulary: the endpoints, one upstream request, what a
reply captured, and the shapes an answer must have before anything reads it."""
