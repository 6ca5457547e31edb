"""Serving translations over HTTP: the FastAPI app (app.py), dynamic batching across clients
(batcher.py), Prometheus metrics (metrics.py) and the web page (static/index.html)."""
