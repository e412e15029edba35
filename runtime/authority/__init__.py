"""Authority: capabilities, the broker that holds them, its MCP judgement, the effect journal, request ids."""
