//! Source routes through a built fabric, and standard topologies to build.

use super::{CableConfig, Endpoint, Fabric, FabricBuilder, PortId, SwitchSize, TopologyError};
use crate::wire::Route;
use crate::wire::route::MAX_ROUTE_LEN;
use std::collections::VecDeque;

impl Fabric {
    /// The shortest source route from host port `from` to host port `to` (ties go to the
    /// lowest port numbers), or `None` if `to` cannot be reached. The route to a host on
    /// the other end of a direct cable is the empty route.
    pub fn route(&self, from: PortId, to: PortId) -> Option<Route> {
        let first = self.hosts.get(from.0 as usize)?.out?;
        match self.far_end[first.0 as usize] {
            Endpoint::Host(p) => return (p == to).then(Route::direct),
            Endpoint::Switch(s, _) => {
                let mut seen = vec![false; self.switches.len()];
                let mut queue = VecDeque::from([(s.0 as usize, Vec::<u8>::new())]);
                seen[s.0 as usize] = true;
                while let Some((sw, ports)) = queue.pop_front() {
                    if ports.len() >= MAX_ROUTE_LEN {
                        continue;
                    }
                    for (port, link) in self.switches[sw].out.iter().enumerate() {
                        let Some(link) = link else { continue };
                        let mut next = ports.clone();
                        next.push(port as u8);
                        match self.far_end[link.0 as usize] {
                            Endpoint::Host(p) if p == to => return Route::from_ports(&next).ok(),
                            Endpoint::Host(_) => {}
                            Endpoint::Switch(s2, _) if !seen[s2.0 as usize] => {
                                seen[s2.0 as usize] = true;
                                queue.push_back((s2.0 as usize, next));
                            }
                            Endpoint::Switch(..) => {}
                        }
                    }
                }
            }
        }
        None
    }
}

/// Adds `hosts` host ports on one switch (`hosts` at most the switch's size).
pub fn star(
    b: &mut FabricBuilder,
    hosts: usize,
    size: SwitchSize,
    cable: CableConfig,
) -> Result<Vec<PortId>, TopologyError> {
    let sw = b.add_switch(size);
    (0..hosts)
        .map(|i| {
            let p = b.add_host();
            let port = u8::try_from(i)
                .map_err(|_| TopologyError::NoSuchEndpoint(Endpoint::Switch(sw, u8::MAX)))?;
            b.connect(Endpoint::Host(p), Endpoint::Switch(sw, port), cable)?;
            Ok(p)
        })
        .collect()
}

/// Adds `hosts` host ports on a chain of switches: each switch gives its last two ports to
/// its neighbours and the others to hosts. With no more hosts than ports, one switch.
pub fn line(
    b: &mut FabricBuilder,
    hosts: usize,
    size: SwitchSize,
    cable: CableConfig,
) -> Result<Vec<PortId>, TopologyError> {
    let ports = size as usize;
    if hosts <= ports {
        return star(b, hosts, size, cable);
    }
    let per_switch = ports - 2;
    let switches: Vec<_> = (0..hosts.div_ceil(per_switch))
        .map(|_| b.add_switch(size))
        .collect();
    for pair in switches.windows(2) {
        b.connect(
            Endpoint::Switch(pair[0], size as u8 - 1),
            Endpoint::Switch(pair[1], size as u8 - 2),
            cable,
        )?;
    }
    (0..hosts)
        .map(|i| {
            let p = b.add_host();
            b.connect(
                Endpoint::Host(p),
                Endpoint::Switch(switches[i / per_switch], (i % per_switch) as u8),
                cable,
            )?;
            Ok(p)
        })
        .collect()
}
