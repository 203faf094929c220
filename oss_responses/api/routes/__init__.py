"""One module per resource: responses, conversations, models, health, metrics."""
