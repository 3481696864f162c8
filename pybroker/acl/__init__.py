# ACL 1.0 (Java RocketMQ 4.x plain ACL): accounts file, request signatures, the access check.
"""Access control as Java RocketMQ's ACL 1.0 does it (docs/security.md).

``signature`` computes and verifies request signatures (Java ``AclClientRPCHook``),
``plain_config`` reads plain_acl.yml, ``addresses`` its address patterns, ``resources`` says
what each request code needs, and ``validator`` runs the check before every client request.
"""
