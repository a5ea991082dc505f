"""Teaching the algorithm: a narrated demo and a trace viewer.

``snapshot`` turns the reference's observable state (``specs/manager_view.py``,
``specs/pool_view.py``) into a picture a learner can read; ``terminal`` draws it in a terminal,
``page`` as one self-contained HTML file (rendered from the Jinja2 templates in
``templates/``). ``demo`` is the scripted scenario of ``pagedkv demo``;
``walkthrough`` replays a trace through the reference (and a target, side by side) for
``pagedkv show``; ``rules`` names the rule of ``specs/oracle.md`` a divergence broke.

The request level (``specs/request_level.md``) has its own picture (``request_snapshot``),
drawn by ``request_terminal`` and ``templates/request_picture.html`` beside the others, and its
own scenario (``request_demo``, ``pagedkv demo --level request``); ``pictures.picture_of`` draws
any level's view, which is what ``walkthrough`` calls.
"""
