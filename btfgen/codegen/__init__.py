"""Code generation: view models in Python, text from the jinja2 templates."""
