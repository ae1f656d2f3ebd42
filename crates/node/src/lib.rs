//! One Waverunner replica (work in progress).
