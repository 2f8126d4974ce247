/// @file
/// Exception types. Bad parameters throw std::invalid_argument; faults of the machine or of data
/// outside the caller's arguments throw the types below.
#pragma once

#include <stdexcept>
#include <string>

namespace bulkbloom {

/// Base of bulkbloom's own errors (I/O, formats, backends).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The filter's memory could not be allocated (host or device).
class AllocationError : public Error {
 public:
  using Error::Error;
};

/// The requested backend or implementation is not available in this build or on this machine.
class BackendUnavailable : public Error {
 public:
  using Error::Error;
};

/// A GPU call failed at run time; the message names the failing CUDA call and CUDA's error text.
class DeviceError : public Error {
 public:
  using Error::Error;
};

}  // namespace bulkbloom
