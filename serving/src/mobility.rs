//! User mobility inside a rectangular service area (paper: 200 m × 200 m,
//! "user locations evolve randomly in each time slot").
//!
//! - **Random walk**: each slot the user moves `speed·Δ` metres in a uniformly
//!   drawn direction; a step that would leave the area is reflected at the
//!   border (mirror image), so users stay uniformly spread.
//! - **Random waypoint**: the user picks a uniform destination and a uniform
//!   speed in `[v_min, v_max]`, walks there in a straight line, then picks the
//!   next one (no pause).

use rand::Rng;

/// A point in metres.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Position {
    pub x: f64,
    pub y: f64,
}

impl Position {
    pub fn distance(&self, o: &Position) -> f64 {
        self.distance_squared(o).sqrt()
    }

    /// The squared distance, m² (what the path-loss power law needs).
    pub fn distance_squared(&self, o: &Position) -> f64 {
        (self.x - o.x).powi(2) + (self.y - o.y).powi(2)
    }
}

/// The service area, `[0, width] × [0, height]` metres.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Area {
    pub width_m: f64,
    pub height_m: f64,
}

impl Area {
    pub fn uniform(&self, rng: &mut impl Rng) -> Position {
        Position {
            x: rng.random::<f64>() * self.width_m,
            y: rng.random::<f64>() * self.height_m,
        }
    }
}

/// How users move.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mobility {
    RandomWalk {
        speed_m_s: f64,
    },
    RandomWaypoint {
        min_speed_m_s: f64,
        max_speed_m_s: f64,
    },
}

impl Mobility {
    /// `random-walk` (1.5 m/s, pedestrian) or `random-waypoint` (0.5–3 m/s).
    pub fn parse(name: &str) -> Result<Self, crate::ServingError> {
        match name {
            "random-walk" | "walk" => Ok(Mobility::RandomWalk { speed_m_s: 1.5 }),
            "random-waypoint" | "waypoint" => Ok(Mobility::RandomWaypoint {
                min_speed_m_s: 0.5,
                max_speed_m_s: 3.0,
            }),
            _ => Err(crate::ServingError::UnknownMobility {
                name: name.to_string(),
            }),
        }
    }
}

/// One user's motion state.
#[derive(Debug, Clone, PartialEq)]
pub struct UserMotion {
    pub pos: Position,
    waypoint: Option<(Position, f64)>,
}

fn reflect(v: f64, max: f64) -> f64 {
    if max <= 0.0 {
        return 0.0;
    }
    let period = 2.0 * max;
    let m = v.rem_euclid(period);
    if m > max {
        period - m
    } else {
        m
    }
}

impl UserMotion {
    pub fn new(pos: Position) -> Self {
        UserMotion {
            pos,
            waypoint: None,
        }
    }

    /// Moves for `dt_s` seconds.
    pub fn advance(&mut self, m: &Mobility, area: &Area, dt_s: f64, rng: &mut impl Rng) {
        match *m {
            Mobility::RandomWalk { speed_m_s } => {
                let th = rng.random::<f64>() * std::f64::consts::TAU;
                let d = speed_m_s * dt_s;
                self.pos = Position {
                    x: reflect(self.pos.x + d * th.cos(), area.width_m),
                    y: reflect(self.pos.y + d * th.sin(), area.height_m),
                };
            }
            Mobility::RandomWaypoint {
                min_speed_m_s,
                max_speed_m_s,
            } => {
                let mut left = dt_s;
                // Bounded: each pass either ends the step or reaches a waypoint.
                for _ in 0..64 {
                    let (dst, v) = match self.waypoint {
                        Some(w) => w,
                        None => {
                            let w = (
                                area.uniform(rng),
                                min_speed_m_s
                                    + rng.random::<f64>() * (max_speed_m_s - min_speed_m_s),
                            );
                            self.waypoint = Some(w);
                            w
                        }
                    };
                    let dist = self.pos.distance(&dst);
                    let reach = v.max(1e-9) * left;
                    if reach < dist {
                        let f = reach / dist;
                        self.pos.x += (dst.x - self.pos.x) * f;
                        self.pos.y += (dst.y - self.pos.y) * f;
                        return;
                    }
                    self.pos = dst;
                    left -= dist / v.max(1e-9);
                    self.waypoint = None;
                    if left <= 0.0 {
                        return;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn users_stay_inside_and_move_at_their_speed() {
        let area = Area {
            width_m: 200.0,
            height_m: 100.0,
        };
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for m in [
            Mobility::parse("random-walk").unwrap(),
            Mobility::parse("random-waypoint").unwrap(),
        ] {
            let mut u = UserMotion::new(Position { x: 1.0, y: 99.0 });
            for _ in 0..2000 {
                let before = u.pos;
                u.advance(&m, &area, 1.0, &mut rng);
                assert!((0.0..=200.0).contains(&u.pos.x) && (0.0..=100.0).contains(&u.pos.y));
                assert!(before.distance(&u.pos) <= 3.0 + 1e-9);
            }
        }
        assert_eq!(reflect(-1.0, 10.0), 1.0);
        assert_eq!(reflect(11.0, 10.0), 9.0);
        assert!(Mobility::parse("teleport").is_err());
    }
}
