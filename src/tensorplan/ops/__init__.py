"""What operators mean, read by every stage: what a schema says of views, in-place twins and
metadata-only ops (``schemas.py``), and each control-flow operator (cond, while_loop, map,
scan) described once (``control_flow.py``). No stage of its own: tables in, facts out."""
