"""Specs loaded and checked: schemas, the catalog, the spec dataclasses, study options, Hugging Face import."""
