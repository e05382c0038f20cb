"""Small example models in plain JAX, exported into specs/models/ by tools/export_examples.py."""
