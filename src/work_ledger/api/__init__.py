"""The HTTP API: handlers validate and authorize, then call the service."""
