//! Sample games for Ferry.
