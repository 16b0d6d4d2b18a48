//! What the fuzz targets share.

/// Splits fuzz input into packets: chunks of `u16 LE length + bytes`, the
/// last one cut short where the input ends (a dangling length byte is
/// dropped). Lets one input stand for a sequence of datagrams off the network.
pub fn chunks(mut data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while data.len() >= 2 {
        let n = usize::from(u16::from_le_bytes([data[0], data[1]]));
        data = &data[2..];
        let n = n.min(data.len());
        out.push(&data[..n]);
        data = &data[n..];
    }
    out
}
