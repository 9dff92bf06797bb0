"""Benchmarks: episode generators (synthetic, tau-bench, ToolBench, Stage D) and the
reproduce pipelines that run them into a results directory."""
