"""The docket web console: a small local web app over the :class:`~docket.Docket` facade.

``create_app(docket, token=...)`` returns a Starlette application; ``docket ui --backend
URL`` serves it with uvicorn on 127.0.0.1. Needs the ``ui`` extra (starlette, jinja2,
uvicorn, python-multipart). See docs/console.md.
"""

from docket.ui.app import create_app

__all__ = ["create_app"]
