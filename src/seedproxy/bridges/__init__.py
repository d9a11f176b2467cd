"""Protocol bridges: the Responses and Anthropic Messages APIs to and from chat
completions, for upstreams that serve only chat. Pure translation, no I/O."""
