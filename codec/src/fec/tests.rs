//! Property tests of the whole codec (filled below).
