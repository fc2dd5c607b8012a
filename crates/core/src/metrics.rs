//! NUMA metrics of reference/policies.md §0 (filled in by the metrics work).
