#pragma once
// Boost.Process v2 as Boost 1.81 ships it: its headers use boost::optional and Boost.TypeTraits names
// (is_constructible, remove_pointer) without including them, which only works by accident of include
// order (and not with BOOST_ASIO_NO_DEPRECATED). Include them first, then all of v2.

#include <boost/optional.hpp>
#include <boost/type_traits.hpp>

#include <boost/process/v2.hpp>
