//! Piecewise-linear curves over controller or link utilisation (reference/machines.md §5.1):
//! interpolate between points, never extrapolate below the first value, hold the last value
//! above the last point (overload shows up as queueing in the simulator, not in the curve).

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Curve {
    /// (utilisation %, value), utilisation strictly increasing.
    pub points: Vec<(f64, f64)>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CurveError {
    #[error("curve has no points")]
    Empty,
    #[error("curve utilisations must increase strictly: {0} then {1}")]
    NotIncreasing(f64, f64),
    #[error("curve values must not decrease (latency cannot fall with load): {0} then {1}")]
    Decreasing(f64, f64),
    #[error("curve utilisation {0} is outside 0..=100")]
    OutOfRange(f64),
}

impl Curve {
    pub fn new(points: Vec<(f64, f64)>) -> Result<Curve, CurveError> {
        let c = Curve { points };
        c.validate()?;
        Ok(c)
    }

    pub fn validate(&self) -> Result<(), CurveError> {
        if self.points.is_empty() {
            return Err(CurveError::Empty);
        }
        for &(u, _) in &self.points {
            if !(0.0..=100.0).contains(&u) {
                return Err(CurveError::OutOfRange(u));
            }
        }
        for w in self.points.windows(2) {
            if w[1].0 <= w[0].0 {
                return Err(CurveError::NotIncreasing(w[0].0, w[1].0));
            }
            if w[1].1 < w[0].1 {
                return Err(CurveError::Decreasing(w[0].1, w[1].1));
            }
        }
        Ok(())
    }

    /// Value at utilisation `util_frac` (0.0 ..= 1.0, larger values hold the last point).
    pub fn at(&self, util_frac: f64) -> f64 {
        let u = util_frac * 100.0;
        let p = &self.points;
        if u <= p[0].0 {
            return p[0].1;
        }
        for w in p.windows(2) {
            if u <= w[1].0 {
                let t = (u - w[0].0) / (w[1].0 - w[0].0);
                return w[0].1 + t * (w[1].1 - w[0].1);
            }
        }
        p[p.len() - 1].1
    }

    /// Value at zero load.
    pub fn idle(&self) -> f64 {
        self.points[0].1
    }

    /// The curve divided by its idle value (a shape, 1.0 at idle).
    pub fn normalised(&self) -> Curve {
        let idle = self.idle();
        Curve {
            points: self.points.iter().map(|&(u, v)| (u, v / idle)).collect(),
        }
    }

    /// A shape scaled to an idle latency: `idle_ns × shape(u)`.
    pub fn scaled(&self, idle_ns: f64) -> Curve {
        let base = self.idle();
        Curve {
            points: self
                .points
                .iter()
                .map(|&(u, v)| (u, v / base * idle_ns))
                .collect(),
        }
    }

    /// reference/machines.md §5.2, Intel shape (latency ÷ idle).
    pub fn intel_shape() -> Curve {
        Curve {
            points: vec![
                (0.0, 1.0),
                (25.0, 1.08),
                (50.0, 1.20),
                (65.0, 1.30),
                (75.0, 1.45),
                (85.0, 1.75),
                (95.0, 2.30),
                (100.0, 2.90),
            ],
        }
    }

    /// reference/machines.md §5.2, AMD shape: Intel up to 65 %, then Carrefour's 5× overload.
    pub fn amd_shape() -> Curve {
        Curve {
            points: vec![
                (0.0, 1.0),
                (25.0, 1.08),
                (50.0, 1.20),
                (65.0, 1.30),
                (75.0, 1.50),
                (85.0, 1.90),
                (95.0, 2.90),
                (100.0, 5.00),
            ],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpolates_and_holds() {
        let c = Curve::new(vec![(1.0, 92.0), (52.0, 116.0), (100.0, 166.0)]).unwrap();
        assert_eq!(c.at(0.0), 92.0); // never below idle
        assert!((c.at(0.52) - 116.0).abs() < 1e-9);
        assert!((c.at(0.76) - 141.0).abs() < 1e-9);
        assert_eq!(c.at(3.0), 166.0); // hold the last value
        assert!(Curve::new(vec![(0.0, 10.0), (0.0, 11.0)]).is_err());
        assert!(Curve::new(vec![(0.0, 10.0), (50.0, 9.0)]).is_err());
        assert!((Curve::amd_shape().scaled(95.0).at(1.0) - 475.0).abs() < 1e-9);
    }
}
