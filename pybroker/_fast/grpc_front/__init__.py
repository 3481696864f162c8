"""The gRPC front (docs/architecture/grpc.md, "The front"): a libgrpc++ server in the gRPC
worker that serves grpcServerPort and relays every call to the worker's grpcio service on a
private socket. ``relay.h`` / ``relay.cc`` are the C++ (libgrpc++), ``front.pyx`` the Python
face; built by setup.py only when libgrpc++ is found.
"""
