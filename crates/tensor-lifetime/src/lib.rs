//! tensor-lifetime
