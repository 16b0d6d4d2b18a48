//! The mesh's websocket upgrade checks on any head: never a panic; a
//! request is accepted only with a 16-byte key, and a response only when
//! it accepts exactly the key asked with.
//!
//! Input: the first byte picks request (even) or response (odd); the rest
//! is the head.
#![no_main]

use edgemu_codec::wire::upgrade::{accept_key, check_request, check_response, new_key};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&mode, head)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        if let Ok(key) = check_request(head) {
            let text = String::from_utf8_lossy(head);
            assert!(text.contains(&key), "the key comes from the head");
            assert_eq!(accept_key(&key).len(), 28);
        }
    } else {
        let key = new_key([mode; 16]);
        if check_response(head, &key).is_ok() {
            let text = String::from_utf8_lossy(head);
            assert!(text.contains(&accept_key(&key)), "accepted without the right accept key");
        }
    }
});
