//! The PriorityFEC Double-DQN repair scheduler network (being built).
