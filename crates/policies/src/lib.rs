//! Placement policies of the literature, written once against `numalab_core::view`.
