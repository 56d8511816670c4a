"""Cell environments: uv venvs with a cell's pins and the processes started in them (cellenv), pip settings
forwarded to uv (pipconfig), interpreters, environment capture (envinfo), device probes (devices), the import
recorder copied into each environment (importrecord), and a cell's container: its image and what it gets of
this machine (container; incontainer bootstraps the harness inside it).

May import: harness.errors, harness.files.
"""
