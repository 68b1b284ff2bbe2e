"""The JSON the routes take and give (DESIGN section 5), a module per resource, and the
problem document every error is (`problems`); /openapi.json is generated from these
models."""
