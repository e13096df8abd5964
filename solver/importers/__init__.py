"""Importers: model and rig files from what people have (GGUF headers, Hugging Face configs, card names).

They write files; the planner never imports them.
"""
