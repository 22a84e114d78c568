//! The service: one handler per tool of SPEC.md §4. (Being written.)
