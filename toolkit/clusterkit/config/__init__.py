"""Site configuration: schema, bounded YAML with line numbers, ``extends:``, search path (docs/architecture.md)."""
