//! squall._core
