"""jinja2 templates of the generated code (installed as btfgen.templates)."""
