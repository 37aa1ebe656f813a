"""Menu examples: ticket routing with handler, value and schema options."""
