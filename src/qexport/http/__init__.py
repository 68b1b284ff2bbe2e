"""What the HTTP API and the web UI share: the request's container, errors as problem
documents, file responses and body limits. `qexport.app` mounts both over one container."""
