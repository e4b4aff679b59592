"""Graphs as data: schema language, reducers, guards, documents, compiler (layer 2)."""
