"""The Docker gate: the one process of the scale deployment that holds the engine's socket.

Workers reach the Docker engine only through it (``DOCKER_HOST=tcp://dockergate:2375``),
and it lets through exactly the calls Airlock makes, by method, path, query and body,
each checked against what the container it names is:

- ``rules``: the routes — what each call may do and to which container (a sandbox
  only for the client that made it, labelled ``airlock.gate.peer``), and the plan
  (``Plan``) of what is sent on;
- ``creates``: a sandbox container's create, read field by field against an allow-list
  (the sandbox image, a runner command, the hardening every sandbox has) and written
  out again from what was checked;
- ``targets``: the containers Docker actions may act on (``DOCKER_ACTION_CONTAINERS``,
  labels or name patterns), also read by ``executions.actions.docker``;
- ``server``: the asyncio proxy — one request per connection, the attach stream
  spliced both ways, and a sandbox removed as soon as the worker attached to it is gone.

Run it with ``python -m dockergate`` (docker/compose.yml does). It imports the
standard library only: none of Airlock's other packages, no Django, no docker SDK.
"""
