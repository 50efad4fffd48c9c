"""arbi-gateway: the REST/OpenAI gateway in front of arbi-serve's gRPC API.

A separate process that imports no torch: it translates OpenAI-style HTTP requests and the JSON routes of
the protos' `google.api.http` annotations into gRPC calls to an upstream arbi-serve server.
"""
