"""A search engine for your own wiki: the ``pfc`` command (``index``, ``search``, ``serve``) and its web page.

The top part of the package: it builds on everything below it, and nothing in the package imports it.

* :mod:`.folder`: what a search folder holds and how ``pfc index`` builds it from a dump;
* :mod:`.search`: :class:`~.search.Searcher` (TF-IDF, ColBERT or hybrid, with explanations) and terminal output;
* :mod:`.fusion_settings`: the fusion of the two systems; :mod:`.server`: the web page and JSON API;
  :mod:`.cli`: ``pfc``.
"""
