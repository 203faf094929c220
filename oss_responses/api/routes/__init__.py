"""One module per resource: responses, models, health."""
