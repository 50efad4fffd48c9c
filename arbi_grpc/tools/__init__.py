"""Tool calling: tool definitions and choice, their prompt, the parsers of tool calls in model output, the
output constraint of `required` and named choices, and the validation a call passes before a client sees it."""
