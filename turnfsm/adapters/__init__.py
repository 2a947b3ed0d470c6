"""L2: the edges to the outside world: LLM providers (:mod:`.llm`) and inbound formats."""
