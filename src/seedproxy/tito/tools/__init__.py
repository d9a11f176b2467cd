"""Tool-call formats, one module each, parsed as SGLang's detector of the same name
parses them (``base`` holds what they share; ``..tool_parsers`` the registry)."""
