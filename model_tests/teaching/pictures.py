"""The picture of any level's view: what ``pagedkv show`` draws after each step of a trace."""

from __future__ import annotations

from pagedkv.model_tests.teaching.defrag_snapshot import DefragPicture, defrag_picture
from pagedkv.model_tests.teaching.request_snapshot import RequestPicture, request_picture
from pagedkv.model_tests.teaching.snapshot import Picture, manager_picture, pool_picture
from pagedkv.specs.defrag_view import DefragmenterView
from pagedkv.specs.manager_view import ManagerView
from pagedkv.specs.pool_view import PoolView
from pagedkv.specs.request_view import RequestManagerView


def picture_of(
    view: ManagerView | PoolView | RequestManagerView | DefragmenterView,
) -> Picture | RequestPicture | DefragPicture:
    """A request-level view is drawn without its blocks' tokens (``request_picture`` takes them
    where the caller knows its requests)."""
    if isinstance(view, ManagerView):
        return manager_picture(view)
    if isinstance(view, RequestManagerView):
        return request_picture(view)
    if isinstance(view, DefragmenterView):
        return defrag_picture(view)
    return pool_picture(view)
