"""The report formats, in a module light enough for the command line to read before it
imports sympy."""

from rooflinec.base.errors import UsageError

FORMATS = ("md", "html", "json")
CHARTED = ("md", "html")   # formats that show charts (drawn once, shared)


def parse(text: str) -> list[str]:
    """`--format md,html`: the formats named, each one of FORMATS, else a usage error."""
    formats = [f.strip() for f in text.split(",") if f.strip()]
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise UsageError(f"--format: unknown format {', '.join(bad) or '(empty)'}; choose from "
                         f"{', '.join(FORMATS)}")
    return formats
