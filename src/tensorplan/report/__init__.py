"""Reports of a compiled program: terminal tables, JSON, a C header, a timeline picture
and an interactive HTML page."""

from tensorplan.report.export import plan_to_c_header, plan_to_json
from tensorplan.report.html import write_html
from tensorplan.report.tables import plan_summary, spec_table
from tensorplan.report.timeline import plot_timeline

__all__ = ["plan_summary", "plan_to_c_header", "plan_to_json", "plot_timeline", "spec_table",
           "write_html"]
