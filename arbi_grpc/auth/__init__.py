"""Authentication of gRPC calls: the server's bearer credentials and the interceptor that checks them."""
