"""The report formats, in a module light enough for the command line to read before it
imports sympy (a build starts its chart painter first, so matplotlib loads alongside)."""

FORMATS = ("md", "html", "json")
CHARTED = ("md", "html")   # formats that show charts (drawn once, shared)
