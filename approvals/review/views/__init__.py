"""The reviewers' console pages, one module per group of pages; ``console.console_urls`` mounts them.

``proposals`` (the queue, a proposal and its decision, history, the overview),
``policy`` (editor, versions, suggestions), ``agents``, ``profile``,
``deliveries`` (the delivery log) and ``links`` (one-tap review from a mail).
"""
