"""Site configuration (docs/architecture.md §5): :mod:`.schema` (the pydantic models), :mod:`.yaml_lines`
(bounded YAML read with the line of every key), :mod:`.load` (``extends:``, ``file:line`` errors,
template trust, the search path).  :mod:`.site` only re-exports the old names."""
