"""The commands: argument parsing, the build driver, the report dict, output staging."""
