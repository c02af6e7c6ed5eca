"""The reviewers' console: the pages, forms and live updates people decide with.

Owns the console's pages (``views/``), their forms (``forms``), the live
queue over a websocket (``consumers``), the overview's numbers
(``overview``, from the tallies of settled days it keeps in ``models``) and
charts (``charts``), the history's capped count (``paging``), what the
proposal page shows of the agent's past (``history``) and identical
proposals folded into one queue row (``grouping``). Views parse input,
check access, call one service and render.

May import everything of the app below it (notify, core, policy, models)
and the apps below the app; never ``approvals.agents``.
"""
