"""The model server, ``python -m trainer.serve``: the trained model behind the Open Inference Protocol
(KServe V2) over REST, on the standard library and torch only.

The parts: :mod:`trainer.serve.cli` (usage, flags, start-up and exit codes: start here),
:mod:`trainer.serve.config` (its settings and the names it shares), :mod:`trainer.serve.load` (the model
read from a directory or S3, verified against SHA256SUMS, loaded), :mod:`trainer.serve.protocol` (the
V2 request checked and answered, its JSON parsed within bounds), :mod:`trainer.serve.server` (the
HTTP routes, limits and errors), :mod:`trainer.serve.connections` (connection, deadline, request-slot
and body-memory bounds).
Nothing here imports torch until the flags are checked and the port is open.

Why a small server on the standard library (``http.server.ThreadingHTTPServer``) and not KServe's
Python model server (``kserve`` on PyPI), the reference implementation: under constraints.txt pip
resolves ``kserve`` to 0.16.0, and its closure is 59 packages (``pip install --dry-run --report``),
most of which the trainer image does not have (fastapi, starlette, uvicorn with uvloop and
httptools, pandas, grpcio-tools, the kubernetes client, aiohttp, orjson, prometheus-client,
cloudevents, ...). It would fit beside
torch 2.13.0 and pulumi's grpcio/protobuf pins (``pip install --dry-run -c constraints.txt kserve``
resolves without changing them), but the protocol's REST part that this model needs is six routes
over JSON, so the image keeps torch + boto3 only. KServe's own ``InferenceRESTClient`` (0.16.0,
protocol v2) works against this server unmodified.
"""
