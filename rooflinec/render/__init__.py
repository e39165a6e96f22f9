"""Laying out what the analyses computed: Jinja2 templates, charts, MathML, Markdown tables."""
