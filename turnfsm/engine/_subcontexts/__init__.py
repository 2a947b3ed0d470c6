"""Sub-contexts: a child context runs a sub-task and is summarised into its parent.

``spawn`` makes a child of a resting context (its ``parent_id`` set, its config
taken from the parent unless given), records ``child_spawned`` on the parent,
and sends the task as the child's first message. ``finish`` turns a child at
rest in ``Idle`` into one summary message on the parent's active branch
(``child_finished``), then deletes the child, or keeps it finished
(``archived``: it takes no more input). A sub-task tool runs its child the
same way from inside the parent's call. See docs/architecture.md,
"Sub-contexts".

One module per job, none importing another of them but ``_lifecycle``:

- ``_lifecycle``: :class:`SubContexts`, the part of the engine that spawns,
  finishes, lists and deletes children and routes decisions to them;
- ``_approvals``: a parent's decisions routed to the children it waits for,
  and their pending calls surfaced on the parent's turn;
- ``_subtask``: a sub-task tool's child, run from inside the parent's call;
- ``_records``: what each of those commits on one context;
- ``_summarizers``: how a child becomes the text that stands for it;
- ``_tree``: a context's children and tree as the store lists them.
"""
