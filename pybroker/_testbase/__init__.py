# Test support shipped with the package: launch real pybroker processes on free local ports.
